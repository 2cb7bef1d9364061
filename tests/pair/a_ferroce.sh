#!/bin/bash
# tools/vm pair: guest A, the client, on a ferroce device (see matrix.sh)
exec bash "$(dirname "$0")/matrix.sh" client ferroce
