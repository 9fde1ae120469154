package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// TestFitRecordCutsLargestPart: a run's and an eval's record over their
// budget are cut to fit from the end of their largest parts (the eval's
// transcript first), with the flags set; one within it is left as is.
func TestFitRecordCutsLargestPart(t *testing.T) {
	run := &wire.Record{State: wire.StateCompleted, Result: &wire.Result{
		Stdout: bytes.Repeat([]byte("o"), 300<<10), Stderr: []byte("warn\n"),
		Outputs: map[string][]byte{"big.bin": make([]byte, 200<<10), "small.txt": []byte("keep")}}}
	data, err := fitRecord(run, 150<<10)
	if err != nil || len(data) > 150<<10 {
		t.Fatalf("run record: %d bytes, %v", len(data), err)
	}
	var got wire.Record
	json.Unmarshal(data, &got)
	r := got.Result
	if !got.QuotaTruncated || !r.StdoutTruncated || !r.OutputsTruncated || r.Outputs["big.bin"] != nil || string(r.Outputs["small.txt"]) != "keep" ||
		string(r.Stderr) != "warn\n" || len(r.Stdout) == 0 || len(r.Stdout) < 90<<10 {
		t.Errorf("run record cut to %d bytes: quota %v, stdout %d (truncated %v), outputs %v (truncated %v), stderr %q",
			len(data), got.QuotaTruncated, len(r.Stdout), r.StdoutTruncated, len(r.Outputs), r.OutputsTruncated, r.Stderr)
	}

	eval := &wire.Record{State: wire.StateCompleted, Eval: &wire.EvalResult{Status: "ok", Value: "42",
		Stdout: strings.Repeat("é", 100<<10), Stderr: "e", ToolCalls: json.RawMessage(`[{"name":"x"}]`)}}
	data, err = fitRecord(eval, 64<<10)
	if err != nil || len(data) > 64<<10 {
		t.Fatalf("eval record: %d bytes, %v", len(data), err)
	}
	json.Unmarshal(data, &got)
	e := got.Eval
	if !got.QuotaTruncated || e.ToolCalls != nil || !e.StdoutTruncated || e.Value != "42" || e.Stderr != "e" || len(e.Stdout) < 32<<10 || !strings.HasSuffix(e.Stdout, "é") {
		t.Errorf("eval record cut to %d bytes: quota %v, stdout %d (truncated %v), transcript %s", len(data), got.QuotaTruncated, len(e.Stdout), e.StdoutTruncated, e.ToolCalls)
	}

	small := &wire.Record{State: wire.StateCompleted, Result: &wire.Result{Stdout: []byte("hi\n")}}
	want, _ := json.Marshal(small)
	if data, _ := fitRecord(small, 64<<10); !bytes.Equal(data, want) || small.QuotaTruncated {
		t.Errorf("a record within its budget changed: %s", data)
	}
}
