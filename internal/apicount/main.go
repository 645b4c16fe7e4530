// Command apicount counts the exported API of Go packages as go/doc shows it
// over their non-test files: each exported top-level const, var, type and
// func counts one name (a group of constants counts each name), and each
// exported method of an exported type counts one method. It prints one line
// per package directory:
//
//	<dir>  names N  methods M
//
// Usage:
//
//	go run ./internal/apicount [-v] [dir ...]
//
// With no directory it counts ".". With -v it lists the names too. A
// directory with no Go package (or only package main) prints nothing.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its arguments and outputs; it returns the exit
// status: 0, 1 when a directory cannot be read, 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("apicount", flag.ContinueOnError)
	fl.SetOutput(stderr)
	verbose := fl.Bool("v", false, "list the names and methods")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	dirs := fl.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	status := 0
	for _, dir := range dirs {
		pkgs, err := Count(dir)
		if err != nil {
			fmt.Fprintln(stderr, "apicount:", err)
			status = 1
			continue
		}
		for _, p := range pkgs {
			fmt.Fprintf(stdout, "%-14s names %3d  methods %3d\n", p.Name, len(p.Names), len(p.Methods))
			if *verbose {
				for _, n := range p.Names {
					fmt.Fprintln(stdout, "  ", n)
				}
				for _, m := range p.Methods {
					fmt.Fprintln(stdout, "  ", m)
				}
			}
		}
	}
	return status
}
