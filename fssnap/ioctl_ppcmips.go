//go:build ppc64 || ppc64le || mips || mipsle || mips64 || mips64le || sparc64

package fssnap

// As ioctl.go, in these architectures' encoding (write: 4 << 29).
const (
	iocSnapCreateV2 = 0x90009417
	iocSnapDestroy  = 0x9000940f
)
