package lock

import "golang.org/x/sys/unix"

// networkFS maps statfs magic numbers of filesystems on which flock(2) is
// emulated, local to one client, or otherwise not to be trusted.
var networkFS = map[int64]string{
	0x6969:     "NFS",
	0x517b:     "SMB",
	0xff534d42: "CIFS",
	0xfe534d42: "SMB2",
	0x65735546: "FUSE",
	0x01021997: "9P",
	0x564c:     "NCP",
	0x6b414653: "AFS",
	0x47504653: "GPFS",
	0x0bd00bd0: "Lustre",
	0x19830326: "FhGFS",
	0x73757245: "Coda",
	0x00c36400: "CephFS",
}

// NetworkFilesystem names the filesystem of path if it is a network or
// FUSE filesystem, where flock semantics are not guaranteed, and returns ""
// for a local one.
func NetworkFilesystem(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return ""
	}
	return networkFS[int64(st.Type)]
}
