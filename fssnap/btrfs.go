package fssnap

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs's snapshot ioctls (linux/btrfs.h), called on descriptors opened without following a
// link, which the btrfs command, given paths, cannot offer.
const (
	// firstFreeObjectID is the inode number of a subvolume's root directory.
	firstFreeObjectID = 256
	subvolReadOnly    = 1 << 1 // BTRFS_SUBVOL_RDONLY
	// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2) and _IOW(0x94, 15, struct btrfs_ioctl_vol_args),
	// both structs 4096 bytes.
	iocSnapCreateV2 = 0x50009417
	iocSnapDestroy  = 0x5000940f
)

// volArgsV2 is struct btrfs_ioctl_vol_args_v2: the source subvolume's descriptor, flags, and
// the new snapshot's name.
type volArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [4040]byte
}

// volArgs is struct btrfs_ioctl_vol_args: the name of the subvolume to remove.
type volArgs struct {
	fd   int64
	name [4088]byte
}

// snapshot makes a read-only snapshot of the subvolume whose root directory src is open, as
// name in the directory dst is open on (both O_RDONLY directories of one Btrfs file system).
func snapshot(src, dst int, name string) error {
	var args volArgsV2
	if len(name) >= len(args.name) {
		return fmt.Errorf("snapshot name %q is too long", name)
	}
	args.fd = int64(src)
	args.flags = subvolReadOnly
	copy(args.name[:], name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(dst), iocSnapCreateV2, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return errno
	}
	return nil
}

// destroy removes the subvolume name in the directory dir is open on.
func destroy(dir int, name string) error {
	var args volArgs
	if len(name) >= len(args.name) {
		return fmt.Errorf("snapshot name %q is too long", name)
	}
	copy(args.name[:], name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(dir), iocSnapDestroy, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return errno
	}
	return nil
}

func init() {
	// The kernel reads exactly 4096 bytes of each.
	if unsafe.Sizeof(volArgsV2{}) != 4096 || unsafe.Sizeof(volArgs{}) != 4096 {
		panic("fssnap: btrfs ioctl argument sizes")
	}
}
