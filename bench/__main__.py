"""``python -m bench [--quick] [--only w1,w2,w3,w4,langgraph]``: run the benchmarks, write bench/results/."""

from bench.run import main

main()
