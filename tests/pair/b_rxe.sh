#!/bin/bash
# tools/vm pair: guest B, the server, on an rxe device (see matrix.sh)
exec bash "$(dirname "$0")/matrix.sh" server rxe
