package pgstore_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// children runs the node processes of the multi-process tests (the chaos
// test and the rate test): each is this test binary re-running one test
// with its own environment, its output appended to dir/stderr. Every
// child still running when the test ends is killed, and if the test
// failed the tail of the children's output is logged.
type children struct {
	t       *testing.T
	dir     string
	test    string                // the test the children run
	nodes   map[string]*chaosProc // running (or stopped) processes by node
	started int                   // children started so far
}

// chaosProc is one child process.
type chaosProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan error
	stopped bool
}

// newChildren returns the children of test, their output in dir. Call it
// after whatever the children use is set up (the schema), so that they
// are killed before it is torn down.
func newChildren(t *testing.T, dir, test string) *children {
	ch := &children{t: t, dir: dir, test: test, nodes: map[string]*chaosProc{}}
	t.Cleanup(func() {
		for _, p := range ch.nodes {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "stderr")); err == nil && len(b) > 0 {
				t.Logf("children's stderr (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
	})
	return ch
}

// spawn starts the next child, node-NN, with env(node) added to this
// process's environment, and returns its name.
func (ch *children) spawn(env func(node string) []string) string {
	ch.started++
	node := fmt.Sprintf("node-%02d", ch.started)
	cmd := exec.Command(os.Args[0], "-test.run=^"+ch.test+"$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), env(node)...)
	errf, err := os.OpenFile(filepath.Join(ch.dir, "stderr"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		ch.t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = errf, errf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		ch.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		ch.t.Fatalf("starting %s: %v", node, err)
	}
	p := &chaosProc{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	ch.nodes[node] = p
	return node
}
