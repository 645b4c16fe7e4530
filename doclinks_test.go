package backpressure_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docLink is a qualified doc link, [pkg.Name] or [pkg.Name.Member] (with
// an optional * before pkg), as go doc reads them.
var docLink = regexp.MustCompile(`\[\*?([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z][A-Za-z0-9_]*))?\]`)

// localLink is a doc link within a package, [Name] or [Name.Member], not
// preceded by a name (Quotas[Namespace] indexes a map).
var localLink = regexp.MustCompile(`(?:^|[^A-Za-z0-9_\]])\[\*?([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z][A-Za-z0-9_]*))?\]`)

// repoPackage is what a package of this repository declares: its exported
// top-level names, and the fields and methods of each of its types.
type repoPackage struct {
	names   map[string]bool
	members map[string]map[string]bool
}

// TestDocLinksResolve: every doc link in the repository's Go comments that
// names a package of the repository, [outbox.Row] or [*dispatch.OptionError]
// or [backpressure.Config.Weights], names something that package declares,
// and so does every link within a package, [Options.Backoff]. go vet and go
// doc do not check them: an unresolved link is printed as plain text, and
// the docs then point at something removed (issue 29, item 19:
// backpressure.MaxWeight, removed).
func TestDocLinksResolve(t *testing.T) {
	byName := map[string]*repoPackage{} // qualified links: by package name
	byDir := map[string]*repoPackage{}  // local links: by directory and name
	type parsed struct {
		path, dir string
		f         *ast.File
	}
	var files []parsed
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path) + ":" + f.Name.Name
		files = append(files, parsed{path, dir, f})
		if !strings.HasSuffix(path, "_test.go") {
			declare(byName, f.Name.Name, f)
			declare(byDir, dir, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range files {
		for _, cg := range x.f.Comments {
			text := cg.Text()
			for _, m := range docLink.FindAllStringSubmatch(text, -1) {
				if p, ok := byName[m[1]]; ok && !p.has(m[2], m[3]) {
					t.Errorf("%s: doc link %s names nothing package %s declares", x.path, m[0], m[1])
				}
			}
			for _, m := range localLink.FindAllStringSubmatch(text, -1) {
				if p, ok := byDir[x.dir]; ok && !p.has(m[1], m[2]) {
					t.Errorf("%s: doc link %s names nothing its package declares", x.path, m[0][strings.Index(m[0], "["):])
				}
			}
		}
	}
}

// has reports whether p declares name, and member of it when not "".
func (p *repoPackage) has(name, member string) bool {
	return p.names[name] && (member == "" || p.members[name][member])
}

// declare records f's top-level names, and its types' fields and methods,
// in pkgs under key.
func declare(pkgs map[string]*repoPackage, key string, f *ast.File) {
	p := pkgs[key]
	if p == nil {
		p = &repoPackage{names: map[string]bool{}, members: map[string]map[string]bool{}}
		pkgs[key] = p
	}
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				p.names[d.Name.Name] = true
				continue
			}
			member(receiverType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					p.names[s.Name.Name] = true
					for _, m := range typeMembers(s.Type) {
						member(s.Name.Name, m)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.names[n.Name] = true
					}
				}
			}
		}
	}
}

// receiverType returns the name of a method's receiver type.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// typeMembers returns the field names of a struct type and the method
// names of an interface type, embedded types included by name.
func typeMembers(e ast.Expr) []string {
	var list *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		list = x.Fields
	case *ast.InterfaceType:
		list = x.Methods
	default:
		return nil
	}
	var out []string
	for _, f := range list.List {
		for _, n := range f.Names {
			out = append(out, n.Name)
		}
		if len(f.Names) == 0 {
			if id := receiverType(f.Type); id != "" {
				out = append(out, id)
			} else if sel, ok := f.Type.(*ast.SelectorExpr); ok {
				out = append(out, sel.Sel.Name)
			}
		}
	}
	return slices.Compact(out)
}
