#!/bin/bash
# tools/vm pair: guest A, the client, on an rxe device (see matrix.sh)
exec bash "$(dirname "$0")/matrix.sh" client rxe
