#!/bin/sh
set -e
# Stopping the daemon leaves running backups alone: they are their own units.
if [ -d /run/systemd/system ]; then
	systemctl stop holdfast.service || true
fi
