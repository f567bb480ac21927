#!/bin/bash
# Run once by the postgres image when it creates the primary's database:
# the standby connects as delayd for replication (password auth).
set -euo pipefail
echo "host replication delayd all scram-sha-256" >> "$PGDATA/pg_hba.conf"
