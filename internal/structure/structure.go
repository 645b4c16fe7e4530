package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// LongLines is the length above which a function counts as long.
const LongLines = 80

// Func is one function or method declared in a package: its name as
// go/types prints it ("Sweep", "(*Backpressure).Plan", "(*sweeper).plan"),
// its file (base name) and its lines, from the func keyword to the closing
// brace (the doc comment not counted).
type Func struct {
	Name  string
	File  string
	Lines int
}

// Report is the structure of one package, measured over its non-test files.
type Report struct {
	Package string
	// Long lists the functions over LongLines lines, longest first.
	Long []Func
	// TwoWay lists the pairs of files each of which calls a function
	// declared in the other, as "a.go ↔ b.go" with a < b, sorted.
	TwoWay []string
	// Entry is the entry function measured, Reach the functions it
	// reaches (itself among them) through static calls and references
	// to functions inside the package, sorted by name.
	Entry      string
	Reach      []Func
	ReachLines int
	ReachFiles int
}

// Measure measures the package in dir. entry names the function whose
// reach is measured, as Func.Name does, or several, comma-separated, whose
// reach together is measured; "" measures none. A call through
// an interface or a function value is not followed; a method call is
// resolved by its receiver's static type, and a generic function or method
// stands for every instance.
func Measure(dir, entry string) (Report, error) {
	name, nodes, err := graph(dir)
	if err != nil {
		return Report{}, err
	}
	r := Report{Package: name, Entry: entry, Long: long(nodes), TwoWay: twoWay(nodes)}
	if entry == "" {
		return r, nil
	}
	var roots []*types.Func
	for _, want := range strings.Split(entry, ",") {
		var root *types.Func
		for obj, n := range nodes {
			if n.Name == strings.TrimSpace(want) {
				root = obj
			}
		}
		if root == nil {
			return Report{}, fmt.Errorf("structure: no function %s in %s", want, dir)
		}
		roots = append(roots, root)
	}
	files := map[string]bool{}
	for fn := range reach(nodes, roots...) {
		n := nodes[fn]
		r.Reach = append(r.Reach, n.Func)
		r.ReachLines += n.Lines
		files[n.File] = true
	}
	r.ReachFiles = len(files)
	sort.Slice(r.Reach, func(i, j int) bool { return r.Reach[i].Name < r.Reach[j].Name })
	return r, nil
}

// node is a function and the package's functions its body names.
type node struct {
	Func
	calls map[*types.Func]bool
}

// sources is the importer every graph type-checks against, reading the
// compiler's export data of the packages the measured ones import (go
// list -export builds them, or finds them in the build cache), and the file
// set it and the measured packages share: one per process, so that a
// package several measured packages import is read once. exports maps an
// import path to its export data file. The importer is not safe for
// concurrent use: graph holds mu.
var sources struct {
	mu      sync.Mutex
	fset    *token.FileSet
	imp     types.Importer
	exports map[string]string
}

// graph type-checks the package in dir, over its non-test files, and
// returns its name and its functions with what each calls.
func graph(dir string) (string, map[*types.Func]*node, error) {
	sources.mu.Lock()
	defer sources.mu.Unlock()
	if sources.imp == nil {
		sources.fset, sources.exports = token.NewFileSet(), map[string]string{}
		sources.imp = importer.ForCompiler(sources.fset, "gc", func(path string) (io.ReadCloser, error) {
			f, ok := sources.exports[path]
			if !ok {
				return nil, fmt.Errorf("structure: no export data for %s", path)
			}
			return os.Open(f)
		})
	}
	fset := sources.fset
	files, err := parseDir(fset, dir)
	if err != nil {
		return "", nil, err
	}
	if err := listExports(dir, files); err != nil {
		return "", nil, err
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: sources.imp, Error: func(error) {}}
	pkg, _ := conf.Check(files[0].Name.Name, fset, files, info)
	if pkg == nil {
		return "", nil, fmt.Errorf("structure: cannot type-check %s", dir)
	}
	nodes := map[*types.Func]*node{}
	for _, f := range files {
		file := filepath.Base(fset.Position(f.Pos()).Filename)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			obj, _ := info.Defs[fd.Name].(*types.Func)
			if obj == nil {
				continue
			}
			n := &node{Func: Func{Name: funcName(obj), File: file,
				Lines: fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1}, calls: map[*types.Func]bool{}}
			ast.Inspect(fd.Body, func(x ast.Node) bool {
				if id, ok := x.(*ast.Ident); ok {
					if fn, ok := info.Uses[id].(*types.Func); ok && fn.Pkg() == pkg {
						n.calls[fn.Origin()] = true
					}
				}
				return true
			})
			nodes[obj] = n
		}
	}
	return pkg.Name(), nodes, nil
}

// listExports adds to sources.exports the export data of every package
// files import, directly or not, from one go list run in dir.
func listExports(dir string, files []*ast.File) error {
	args := []string{"list", "-deps", "-export", "-f", "{{.ImportPath}}\t{{.Export}}"}
	seen := map[string]bool{}
	for _, f := range files {
		for _, spec := range f.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			if path != "unsafe" && path != "C" && !seen[path] && sources.exports[path] == "" {
				seen[path] = true
				args = append(args, path)
			}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("structure: go list -export in %s: %v\n%s", dir, err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			sources.exports[path] = file
		}
	}
	return nil
}

// parseDir parses the non-test files of dir into fset.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("structure: no Go files in %s", dir)
	}
	return files, nil
}

// long returns the functions over LongLines lines, longest first.
func long(nodes map[*types.Func]*node) []Func {
	var out []Func
	for _, n := range nodes {
		if n.Lines > LongLines {
			out = append(out, n.Func)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Lines != out[j].Lines {
			return out[i].Lines > out[j].Lines
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// twoWay returns the pairs of files that call each other, sorted.
func twoWay(nodes map[*types.Func]*node) []string {
	pairs := map[[2]string]bool{}
	for _, n := range nodes {
		for c := range n.calls {
			if m := nodes[c]; m != nil && m.File != n.File {
				pairs[[2]string{n.File, m.File}] = true
			}
		}
	}
	var out []string
	for p := range pairs {
		if p[0] < p[1] && pairs[[2]string{p[1], p[0]}] {
			out = append(out, p[0]+" ↔ "+p[1])
		}
	}
	sort.Strings(out)
	return out
}

// reach returns the functions the roots reach, themselves among them.
func reach(nodes map[*types.Func]*node, roots ...*types.Func) map[*types.Func]bool {
	seen := map[*types.Func]bool{}
	for _, root := range roots {
		seen[root] = true
	}
	for stack := slices.Clone(roots); len(stack) > 0; {
		fn := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for c := range nodes[fn].calls {
			if !seen[c] && nodes[c] != nil {
				seen[c] = true
				stack = append(stack, c)
			}
		}
	}
	return seen
}

// funcName names fn as a reader would look it up: "F", or "(T).M" and
// "(*T).M" for methods, without the package or type parameters.
func funcName(fn *types.Func) string {
	sig := fn.Type().(*types.Signature)
	recv := sig.Recv()
	if recv == nil {
		return fn.Name()
	}
	t := recv.Type()
	star := ""
	if p, ok := t.(*types.Pointer); ok {
		star, t = "*", p.Elem()
	}
	name := t.String()
	if nt, ok := t.(*types.Named); ok {
		name = nt.Obj().Name()
	}
	return "(" + star + name + ")." + fn.Name()
}
