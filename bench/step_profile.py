"""Issue 14 (step14c): cProfile of the W1 direct-API step, per commit, over the second half of N.

``python -m bench.step_profile MODE N [1|0]`` with MODE ``full`` (``run.checkpoint(state)``),
``changed`` (``checkpoint(state, changed=["messages"])``) or ``append`` (``run.append``):
process-time and wall microseconds per commit, Python calls per commit, Python time outside
``posix.*`` calls and the cumulative microseconds of the commit path's phases. Profiles go to
/tmp/s14/. Numbers that do not drift on a shared machine: calls per commit, phase shares.
"""
import cProfile, pstats, io, os, sys, time, shutil, tempfile, json
os.makedirs("/tmp/s14", exist_ok=True)
os.environ["CKPTFS_FORMAT_VERSION"] = "2"
import ckptfs
from bench.data import message
mode = sys.argv[1]; n = int(sys.argv[2]); prof_on = sys.argv[3] == "1" if len(sys.argv) > 3 else True
msgs = [message(i) for i in range(n)]
root = tempfile.mkdtemp(prefix="s14p-", dir="/tmp")
store = ckptfs.open_store(os.path.join(root, "s"))
run = store.start_run("w1", schema=("chat", 1))
state = {"messages": []}
run.checkpoint(state)
prof = cProfile.Profile()
cpu = []; lat = []
for i, m in enumerate(msgs):
    prof_now = prof_on and i >= n // 2
    if mode == "full":
        state["messages"].append(m) if False else None
        lst = state["messages"]; lst.append(m)
    if prof_now: prof.enable()
    c0 = time.process_time(); t0 = time.perf_counter()
    if mode == "full":
        run.checkpoint(state)
    elif mode == "changed":
        if i: lst = state["messages"]
        state["messages"].append(m)
        run.checkpoint(state, changed=["messages"])
    else:
        run.append("messages", m)
    c1 = time.process_time(); t1 = time.perf_counter()
    if prof_now: prof.disable()
    if i >= n // 2: cpu.append(c1 - c0); lat.append(t1 - t0)
k = len(cpu)
st = pstats.Stats(prof) if prof_on else None
tot_calls = st.total_calls if st else 0
print(f"mode={mode} n={n} cpu_us={sum(cpu)/k*1e6:.0f} wall_us={sum(lat)/k*1e6:.0f} calls/commit={tot_calls/k:.0f} prof_total_us={(st.total_tt if st else 0)/k*1e6:.0f}")
if prof_on:
    s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(60); 
    open(f"/tmp/s14/prof-{mode}-{n}.txt","w").write(s.getvalue())
    s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(60); 
    open(f"/tmp/s14/prof-{mode}-{n}-tot.txt","w").write(s.getvalue())
    prof.dump_stats(f"/tmp/s14/prof-{mode}-{n}.pstats")
shutil.rmtree(root)
if prof_on:
    st2 = pstats.Stats(f"/tmp/s14/prof-{mode}-{n}.pstats")
    sys_tt = sum(v[2] for k, v in st2.stats.items() if k[2].startswith("<built-in method posix."))
    phases = {}
    want = {"_typed": "run.py", "proven_plain": "entries.py", "encode_state": "entries.py", "to_bytes": "manifest_bytes.py",
            "build_record_raw": "records.py", "table": "record_bytes.py", "frame_bodies": "containers.py",
            "unprotected_chunks": "objects.py", "named_raws": "chunk_sets.py", "look_after": "sweeps.py", "after_record": "sweeps.py",
            "_check_not_retired": "repository.py", "_maybe_hint": "repository.py", "prepare_v2": "objects.py", "commit": "local.py",
            "random_nonce": "repository.py", "now": "store.py", "check_labels": "run.py"}
    for k, v in st2.stats.items():
        fn = k[2]; f = k[0]
        if fn in want and f.endswith(want[fn]):
            phases[fn] = phases.get(fn, 0) + v[3]
    print(f"  python_us(excl posix syscalls)={(st2.total_tt - sys_tt)/k_*1e6:.0f} syscalls_us={sys_tt/k_*1e6:.0f} " if False else "", end="")
    kk = len(cpu)
    print(f"  python_us={(st2.total_tt - sys_tt)/kk*1e6:.0f} posix_us={sys_tt/kk*1e6:.0f} " + " ".join(f"{p}={phases[p]/kk*1e6:.0f}" for p in sorted(phases)))
