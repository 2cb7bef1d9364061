#!/bin/bash
# tools/vm pair: guest B, the server, on a ferroce device (see matrix.sh)
exec bash "$(dirname "$0")/matrix.sh" server ferroce
