#!/bin/sh
# After removal. deb: "remove", "purge", "upgrade" and others; rpm: 0 on erase, 1 or more on
# upgrade. Only a purge removes the configuration (the database address) and the state (run
# journals and exit markers); the database itself is the operator's.
set -e
if [ "$1" = purge ]; then
	rm -rf /etc/holdfast /var/lib/holdfast
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
