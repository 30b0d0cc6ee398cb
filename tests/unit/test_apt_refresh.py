# SPDX-License-Identifier: GPL-2.0
"""When a failed refresh of Debian's suites is worth one more apt-get update,
on apt's own words (recorded from real runs of the private apt state)."""
from images.kernels import debian_archive

# apt-get update -q through a proxy on a closed port (apt had retried each 3 times, 7 s in all)
UNREACHABLE = """Err:1 http://deb.debian.org/debian bookworm InRelease
  Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)
W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Could not connect to 127.0.0.1:9 \
(127.0.0.1). - connect (111: Connection refused)
W: Failed to fetch http://deb.debian.org/debian/dists/trixie/InRelease  Unable to connect to 127.0.0.1:9:
"""
# a suite whose InRelease came half (tests/e2e/netfault.py garbled it), beside one unreachable
GARBLED = """W: Failed to fetch http://deb.debian.org/debian/dists/trixie-backports/InRelease  Splitting up \
/c/apt/lists/partial/deb.debian.org_debian_dists_trixie-backports_InRelease into data and signature failed
W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Could not connect to 127.0.0.1:9 \
(127.0.0.1). - connect (111: Connection refused)
"""


def test_a_mirror_nobody_reaches_is_not_asked_again_and_a_garbled_answer_is():
    unreachable = debian_archive.FETCH_FAILED.findall(UNREACHABLE)
    assert len(unreachable) == 2 and not debian_archive.worth_retrying(unreachable)
    garbled = debian_archive.FETCH_FAILED.findall(GARBLED)
    assert len(garbled) == 2 and debian_archive.worth_retrying(garbled)
    assert not debian_archive.worth_retrying([])
