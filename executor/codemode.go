package executor

import (
	"net/http"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// codeMode is POST /v1/codemode: glovebox code mode's description of a
// client's tools under this executor's limits, and its JSON for an
// eval's result, for clients that are not Go (EXECUTOR.md, "Code mode").
// Nothing runs and nothing is recorded.
func (e *evals) codeMode(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	body, werr := readBody(w, r)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	req, err := wire.DecodeCodeModeRequest(body)
	if err != nil {
		e.s.refuse(w, r, err.(*wire.Error))
		return
	}
	lim := e.limits(req.Limits)
	if req.ToolCalls > 0 {
		lim.ToolCalls = req.ToolCalls
	}
	if req.ToolTimeMS > 0 && time.Duration(req.ToolTimeMS)*time.Millisecond < lim.Timeout {
		lim.ToolTime = time.Duration(req.ToolTimeMS) * time.Millisecond
	}
	spec := codemode.Spec{Name: req.Name, Session: req.Session, Tools: req.Docs(), Limits: lim,
		MemoryFloor: e.base.MemoryFloor(), Instructions: req.Instructions, MaxOutput: req.MaxOutput}
	name, desc, derr := codemode.Describe(spec)
	if derr != nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "%v", derr))
		return
	}
	resp := wire.CodeModeResponse{Name: name, Description: desc, InputSchema: codemode.InputSchema()}
	if req.Result != nil {
		res, rerr := req.Result.Result(nil, true)
		if rerr != nil {
			e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "result: %v", rerr))
			return
		}
		out, oerr := codemode.Encode(res, req.Session, req.MaxOutput)
		if oerr != nil {
			e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "%v", oerr))
			return
		}
		resp.Output, resp.IsError = out, res.Status != glovebox.StatusOK
	}
	writeJSON(w, resp)
}
