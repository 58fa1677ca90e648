package fssnap

import (
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs's snapshot ioctls (linux/btrfs.h), called on descriptors opened without following a
// link, which the btrfs command, given paths, cannot offer.
const (
	// firstFreeObjectID is the inode number of a subvolume's root directory.
	firstFreeObjectID = 256
	subvolReadOnly    = 1 << 1 // BTRFS_SUBVOL_RDONLY
	// _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args) and _IOWR(0x94, 61, struct
	// btrfs_ioctl_get_subvol_rootref_args), 4096 bytes each: read and write encode alike
	// everywhere (the write-only ones are in ioctl*.go).
	iocInoLookup        = 0xd0009412
	iocGetSubvolRootref = 0xd000943d
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

// inoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type inoLookupArgs struct {
	treeid   uint64
	objectid uint64
	name     [4080]byte
}

// rootrefArgs is struct btrfs_ioctl_get_subvol_rootref_args.
type rootrefArgs struct {
	minTreeid uint64
	rootref   [255]struct{ treeid, dirid uint64 }
	numItems  uint8
	_         [7]uint8
}

// subvolID is the id of the subvolume whose root directory fd is open on (root only).
func subvolID(fd int) (uint64, error) {
	args := inoLookupArgs{objectid: firstFreeObjectID}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocInoLookup, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return 0, errno
	}
	return args.treeid, nil
}

// dirPath is the path, below the root of the subvolume fd is open in, of its directory whose
// inode is dirid: "" for the root, else "a/b" (root only).
func dirPath(fd int, dirid uint64) (string, error) {
	args := inoLookupArgs{objectid: dirid}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocInoLookup, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return "", errno
	}
	n := 0
	for n < len(args.name) && args.name[n] != 0 {
		n++
	}
	return strings.TrimSuffix(string(args.name[:n]), "/"), nil
}

// nested is one subvolume directly inside another: its id, and the inode of the directory
// that holds it.
type nested struct{ id, dirid uint64 }

// children lists the subvolumes directly inside the one whose root directory fd is open on.
func children(fd int) ([]nested, error) {
	var out []nested
	var args rootrefArgs
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocGetSubvolRootref, uintptr(unsafe.Pointer(&args)))
		if errno != 0 && errno != unix.EOVERFLOW {
			return nil, errno
		}
		for _, r := range args.rootref[:args.numItems] {
			out = append(out, nested{r.treeid, r.dirid})
		}
		if errno != unix.EOVERFLOW { // EOVERFLOW: more than fit; min_treeid says where to go on
			return out, nil
		}
	}
}

func init() {
	// The kernel reads exactly 4096 bytes of each.
	if unsafe.Sizeof(volArgsV2{}) != 4096 || unsafe.Sizeof(volArgs{}) != 4096 ||
		unsafe.Sizeof(inoLookupArgs{}) != 4096 || unsafe.Sizeof(rootrefArgs{}) != 4096 {
		panic("fssnap: btrfs ioctl argument sizes")
	}
}
