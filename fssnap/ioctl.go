//go:build !(ppc64 || ppc64le || mips || mipsle || mips64 || mips64le || sparc64)

package fssnap

// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2) and _IOW(0x94, 15, struct
// btrfs_ioctl_vol_args), both structs 4096 bytes, in the generic encoding (write: 1 << 30).
const (
	iocSnapCreateV2 = 0x50009417
	iocSnapDestroy  = 0x5000940f
)
