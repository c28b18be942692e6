// Command maxrss runs a command and prints its peak resident set size in
// KiB (the kernel's maxrss) on standard output; the command's own output
// goes to standard error. It exits with the command's exit code. A child started by a process inherits, at its exec, that
// process's own peak in its maxrss; so TestListPeakRSS, whose process is
// large under the race detector, starts efakit through this small one.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: maxrss COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "maxrss:", err)
		os.Exit(1)
	}
	fmt.Println(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
	os.Exit(cmd.ProcessState.ExitCode())
}
