// Command testtimes reads `go test -json` on its standard input and
// prints what plain `go test` prints (each package's ok or FAIL line, and
// the output of the tests that fail), then the tests and subtests that
// took at least -over, slowest first, then the last lines of each failing
// test's output again: make e2e pipes its run through it, so that every
// CI log says where the time went and, at its end, what failed and why.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json's output (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is a test that passed or failed, with its time.
type timing struct {
	name    string
	action  string
	elapsed time.Duration
}

func main() {
	over := flag.Duration("over", 30*time.Second, "list the tests that took at least this long")
	flag.Parse()
	failed, err := run(os.Stdin, os.Stdout, *over)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// run copies in's events to out as plain go test would print them, then
// the table of tests that took at least over; it reports whether a test
// or package failed.
func run(in io.Reader, out io.Writer, over time.Duration) (bool, error) {
	pending := map[string][]string{} // a running test's output, by package and test
	var times []timing
	var failures []failure
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event: the build's own output, printed as it is.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				if e.Output != "PASS\n" { // plain go test prints only the ok line
					fmt.Fprint(out, e.Output)
				}
			} else {
				pending[key] = append(pending[key], e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				failed = failed || e.Action == "fail"
				continue
			}
			if e.Action == "fail" {
				failed = true
				fmt.Fprint(out, strings.Join(pending[key], ""))
				if f, ok := failureOf(e.Test, pending[key]); ok {
					failures = append(failures, f)
				}
			}
			delete(pending, key)
			if e.Action != "skip" {
				times = append(times, timing{name: e.Test, action: e.Action, elapsed: time.Duration(e.Elapsed * float64(time.Second))})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return failed, err
	}
	// A test still running when the binary died (a timeout's panic): its
	// output says why.
	for _, lines := range pending {
		fmt.Fprint(out, strings.Join(lines, ""))
	}
	slices.SortFunc(times, func(a, b timing) int {
		return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), strings.Compare(a.name, b.name))
	})
	fmt.Fprintf(out, "\nTests that took %s or more:\n", over)
	for _, t := range times {
		if t.elapsed < over {
			break
		}
		fmt.Fprintf(out, "%8.1fs  %s  %s\n", t.elapsed.Seconds(), t.action, t.name)
	}
	if len(failures) > 0 {
		fmt.Fprintf(out, "\nThe last %d lines of each failing test's output:\n", tailLines)
		for _, f := range failures {
			fmt.Fprintf(out, "--- %s\n%s", f.name, strings.Join(f.tail, ""))
		}
	}
	return failed, nil
}

// tailLines is how much of a failing test's output is printed again at
// the end, where a log cut to its last lines still shows it.
const tailLines = 20

// failure is a failing test and the end of its own output.
type failure struct {
	name string
	tail []string
}

// failureOf is the end of a failing test's output, without go test's
// progress lines; a test whose output is only those (a parent whose
// subtests failed) has nothing to repeat.
func failureOf(name string, lines []string) (failure, bool) {
	var own []string
	for _, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		if strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- ") {
			continue
		}
		own = append(own, l)
	}
	if len(own) == 0 {
		return failure{}, false
	}
	return failure{name: name, tail: own[max(0, len(own)-tailLines):]}, true
}
