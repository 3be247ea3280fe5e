"""Conditional deletes on S3 (moto): ``Storage.delete_many_if`` removes an object only while it
has the ETag it was judged by. moto 5.2 honours ``If-Match`` on DeleteObject (the one-key
path tested here); it ignores the ``ETag`` element of DeleteObjects, which AWS evaluates, so
the batch path is tested for deleting what is unchanged and for never failing the batch."""

from __future__ import annotations

from typing import Any


from ckptfs.storage import open_storage
from tests.conftest import new_s3_url



def test_a_changed_object_is_kept_and_an_unchanged_one_deleted(s3_options: dict[str, Any]
                                                              ) -> None:
    st = open_storage(new_s3_url(), **s3_options)
    st.write("packs/aa/x", b"judged bytes")
    judged = st.scan("packs")["packs/aa/x"].etag
    assert judged
    st.delete("packs/aa/x")
    st.write("packs/aa/x", b"other bytes, written after the judgement")
    assert st.delete_many_if([("packs/aa/x", judged)]) == ["packs/aa/x"]
    assert st.read("packs/aa/x") == b"other bytes, written after the judgement"
    now = st.scan("packs")["packs/aa/x"].etag
    assert st.delete_many_if([("packs/aa/x", now)]) == []
    assert st.size("packs/aa/x") is None
    assert st.delete_many_if([("packs/aa/x", now)]) == []  # absent is fine


def test_a_batch_deletes_the_unchanged(s3_options: dict[str, Any]) -> None:
    st = open_storage(new_s3_url(), **s3_options)
    for i in range(3):
        st.write(f"packs/aa/{i}", b"x%d" % i)
    tags = {p: s.etag for p, s in st.scan("packs").items()}
    assert st.delete_many_if(sorted(tags.items()) + [("packs/aa/absent", None)]) == []
    assert st.scan("packs") == {}
