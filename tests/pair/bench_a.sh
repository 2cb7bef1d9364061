#!/bin/bash
# tools/vm pair: guest A, the client of the two-guest part of `make bench`
# (see tools/bench-pair.sh)
exec bash "$(dirname "$0")/../../tools/bench-pair.sh" client
