// Command structure prints how a package's code is laid out: its functions
// over 80 lines, the pairs of its files that call each other both ways, and
// what one entry function reaches inside the package.
//
// Usage:
//
//	go run ./internal/structure [-entry Sweep] [-v] dir...
//
// Each dir is one package, measured over its non-test files. -entry names
// the function whose reach is printed (as "F" or "(*T).M"), or several,
// comma-separated, whose reach together is printed; a package without
// them prints no reach. -v lists the functions reached.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	entry := flag.String("entry", "Sweep", `the function whose reach is measured, as "F" or "(*T).M"`)
	verbose := flag.Bool("v", false, "list the functions reached")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	if err := run(os.Stdout, dirs, *entry, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(w io.Writer, dirs []string, entry string, verbose bool) error {
	for _, dir := range dirs {
		r, err := Measure(dir, entry)
		if err != nil && strings.Contains(err.Error(), "no function") {
			r, err = Measure(dir, "")
		}
		if err != nil {
			return err
		}
		print(w, dir, r, verbose)
	}
	return nil
}

func print(w io.Writer, dir string, r Report, verbose bool) {
	fmt.Fprintf(w, "package %s (%s)\n", r.Package, dir)
	fmt.Fprintf(w, "  functions over %d lines: %d\n", LongLines, len(r.Long))
	for _, f := range r.Long {
		fmt.Fprintf(w, "    %-40s %4d  %s\n", f.Name, f.Lines, f.File)
	}
	fmt.Fprintf(w, "  file pairs calling each other both ways: %d\n", len(r.TwoWay))
	for _, p := range r.TwoWay {
		fmt.Fprintf(w, "    %s\n", p)
	}
	if len(r.Reach) > 0 {
		fmt.Fprintf(w, "  %s reaches %d functions, %d lines, in %d files\n", r.Entry, len(r.Reach), r.ReachLines, r.ReachFiles)
		if verbose {
			for _, f := range r.Reach {
				fmt.Fprintf(w, "    %-40s %4d  %s\n", f.Name, f.Lines, f.File)
			}
		}
	}
}
