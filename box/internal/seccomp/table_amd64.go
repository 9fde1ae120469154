package seccomp

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

var syscalls = map[string]int{
	"ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
	"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
	"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
	"move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE, "mount_setattr": unix.SYS_MOUNT_SETATTR,
	"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
	"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
	"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
	"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
	"reboot": unix.SYS_REBOOT, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "acct": unix.SYS_ACCT,
	"quotactl": unix.SYS_QUOTACTL, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
	"lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "syslog": unix.SYS_SYSLOG,
	"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME, "clock_adjtime": unix.SYS_CLOCK_ADJTIME,
	"adjtimex": unix.SYS_ADJTIMEX, "vhangup": unix.SYS_VHANGUP,
	"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
	"iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM,
}

var modeArgs = map[int]modeArg{
	unix.SYS_CHMOD: {1, -1, "chmod"}, unix.SYS_FCHMOD: {1, -1, "fchmod"}, unix.SYS_FCHMODAT: {2, -1, "fchmodat"},
	unix.SYS_FCHMODAT2: {2, -1, "fchmodat2"}, unix.SYS_CREAT: {1, -1, "creat"}, unix.SYS_MKNOD: {1, -1, "mknod"},
	unix.SYS_MKNODAT: {2, -1, "mknodat"}, unix.SYS_OPEN: {2, 1, "open"}, unix.SYS_OPENAT: {3, 2, "openat"},
}
