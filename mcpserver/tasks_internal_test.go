package mcpserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tasks/update that answers a task's last question moves the task
// on at once: a tasks/get right after it (before the program's goroutine
// has woken) sees "working", never "input_required" with nothing left to
// answer. The check runs under the store's lock taken with the answer, so
// the program's goroutine cannot get in between: the window is hit every
// time.
func TestTaskLastAnswerLeavesNoEmptyQuestion(t *testing.T) {
	st, err := newTaskStore(TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 20 {
		tk, err := st.start("c", "", cancel)
		if err != nil {
			t.Fatal(err)
		}
		asks := mcp.InputRequestMap{"a": &mcp.ElicitParams{Message: "a?"}, "b": &mcp.ElicitParams{Message: "b?"}}
		got := make(chan mcp.InputResponseMap, 1)
		go func() {
			resp, ok := st.await(ctx, tk, asks)
			if !ok {
				resp = nil
			}
			got <- resp
		}()
		for deadline := time.Now().Add(10 * time.Second); ; {
			st.mu.Lock()
			s := tk.status
			st.mu.Unlock()
			if s == taskInput {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the task never asked")
			}
			time.Sleep(time.Millisecond)
		}
		st.mu.Lock()
		if e := st.answer(tk, map[string]json.RawMessage{"a": json.RawMessage(`{"action":"decline"}`)}); e != nil {
			t.Fatal(e)
		}
		var one map[string]any
		json.Unmarshal(st.wire(tk, "complete", &mcp.Implementation{Name: "t"}), &one)
		if one["status"] != taskInput || len(one["inputRequests"].(map[string]any)) != 1 {
			t.Fatalf("round %d: after one answer of two: %v", i, one)
		}
		if e := st.answer(tk, map[string]json.RawMessage{"b": json.RawMessage(`{"action":"accept","content":{"v":"y"}}`)}); e != nil {
			t.Fatal(e)
		}
		var all map[string]any
		json.Unmarshal(st.wire(tk, "complete", &mcp.Implementation{Name: "t"}), &all)
		st.mu.Unlock()
		if all["status"] != taskWorking || all["inputRequests"] != nil {
			t.Fatalf("round %d: every question answered, yet tasks/get shows %v", i, all)
		}
		resp := <-got
		if len(resp) != 2 || resp["a"] == nil || resp["b"] == nil {
			t.Fatalf("round %d: the program got %v", i, resp)
		}
		st.finish(tk, &mcp.CallToolResult{}, nil)
	}
}
