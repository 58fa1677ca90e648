package systemd

import (
	"slices"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"
)

// Sandbox confines a unit's processes: what a backup needs is to read the files it backs up and
// to write its repository, cache and run journal; nothing else of the host is theirs to change.
// Commands marked privileged (the exit marker's ExecStopPost) run outside it.
type Sandbox struct {
	// ReadOnlySystem makes the whole file system read-only (ProtectSystem=strict, and /home
	// read-only) except ReadWritePaths. Off for command jobs, whose writes holdfast cannot know.
	ReadOnlySystem bool
	// ReadWritePaths stay writable under ReadOnlySystem; a path that does not exist is skipped.
	ReadWritePaths []string
	// PrivateTmp gives the unit its own /tmp and /var/tmp. It hides the host's, so it is off
	// when something the unit needs lives there.
	PrivateTmp bool
	// Capabilities is the bounding set, by name (e.g. "CAP_DAC_READ_SEARCH" for a root backup
	// that must read every file); empty drops them all.
	Capabilities []string
	// Chown lets the unit call chown and its kin (a root restore gives files back to their
	// owners), which the filter of privileged system calls takes away otherwise.
	Chown bool
	// BindReadOnly mounts each Source read-only over its Dest in the unit's own mount namespace
	// (BindReadOnlyPaths=): a backup reads a file system snapshot at the paths it was taken of.
	// systemd follows links in both paths: they must name none that anyone but root controls.
	BindReadOnly []Bind
}

// Bind is one BindReadOnlyPaths= entry.
type Bind struct {
	Source, Dest string
}

// capabilityBits are the capabilities a unit may keep (linux/capability.h): a root backup reads
// (DAC_READ_SEARCH), a root restore gives files back to their owners (CHOWN, DAC_OVERRIDE, FOWNER).
var capabilityBits = map[string]uint{
	"CAP_CHOWN":           0,
	"CAP_DAC_OVERRIDE":    1,
	"CAP_DAC_READ_SEARCH": 2,
	"CAP_FOWNER":          3,
}

// properties are the unit properties of the sandbox; systemd-analyze security counts each.
func (s Sandbox) properties(hasUser bool) ([]sddbus.Property, error) {
	var bounding uint64
	for _, c := range s.Capabilities {
		bit, ok := capabilityBits[c]
		if !ok {
			return nil, errUnknownCapability(c)
		}
		bounding |= 1 << bit
	}
	props := []sddbus.Property{
		prop("NoNewPrivileges", true),
		prop("CapabilityBoundingSet", bounding),
		prop("AmbientCapabilities", uint64(0)),
		prop("PrivateDevices", true),
		prop("PrivateMounts", true),
		prop("ProtectKernelTunables", true),
		prop("ProtectKernelModules", true),
		prop("ProtectKernelLogs", true),
		prop("ProtectControlGroups", true),
		prop("ProtectClock", true),
		prop("ProtectHostname", true),
		prop("ProtectProc", "invisible"),
		prop("ProcSubset", "pid"),
		prop("RestrictSUIDSGID", true),
		prop("RestrictRealtime", true),
		prop("LockPersonality", true),
		prop("MemoryDenyWriteExecute", true),
		// The set of namespace types the unit may create: none.
		prop("RestrictNamespaces", uint64(0)),
		prop("RestrictAddressFamilies", allowList{true, []string{"AF_UNIX", "AF_INET", "AF_INET6"}}),
		prop("SystemCallArchitectures", []string{"native"}),
		prop("SystemCallFilter", allowList{true, []string{"@system-service"}}),
		// A second assignment takes these groups out of the allow list again.
		prop("SystemCallFilter", allowList{false, []string{"@privileged", "@resources"}}),
	}
	if s.Chown {
		// A third puts the chown calls back in.
		props = append(props, prop("SystemCallFilter", allowList{true, []string{"@chown"}}))
	}
	props = append(props,
		prop("SystemCallErrorNumber", int32(1)), // EPERM instead of killing the backup
		prop("UMask", uint32(0o077)),
		prop("KeyringMode", "private"),
		prop("DevicePolicy", "closed"),
		prop("PrivateTmp", s.PrivateTmp),
	)
	if hasUser {
		props = append(props, prop("RemoveIPC", true))
	}
	if len(s.BindReadOnly) > 0 {
		// systemd's (source, destination, ignore a missing source, mount flags); MS_REC as a
		// unit file's default rbind.
		binds := make([]struct {
			Source, Dest  string
			IgnoreMissing bool
			Flags         uint64
		}, len(s.BindReadOnly))
		for i, b := range s.BindReadOnly {
			binds[i].Source, binds[i].Dest, binds[i].Flags = b.Source, b.Dest, unix.MS_REC
		}
		props = append(props, prop("BindReadOnlyPaths", binds))
	}
	if s.ReadOnlySystem {
		props = append(props, prop("ProtectSystem", "strict"))
		// ProtectHome=read-only says again what strict says of /home, /root and /run/user, but
		// wins over a ReadWritePaths= of the very directory (a restore's stage in /home, seen
		// on a booted host): it is left out then.
		if !slices.ContainsFunc(s.ReadWritePaths, coversHome) {
			props = append(props, prop("ProtectHome", "read-only"))
		}
		if len(s.ReadWritePaths) > 0 {
			paths := make([]string, len(s.ReadWritePaths))
			for i, p := range s.ReadWritePaths {
				paths[i] = "-" + p
			}
			props = append(props, prop("ReadWritePaths", paths))
		}
	}
	return props, nil
}

// allowList is systemd's (bas) pair: whether the list allows (true) or denies, and the list.
type allowList struct {
	Allow bool
	Items []string
}

type errUnknownCapability string

func (e errUnknownCapability) Error() string { return "unknown capability " + string(e) }

// coversHome reports whether making p writable makes /home, /root or /run/user writable whole.
func coversHome(p string) bool {
	for _, h := range []string{"/home", "/root", "/run/user"} {
		if p == h || p == "/" || strings.HasPrefix(h, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}
