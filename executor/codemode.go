package executor

import (
	"net/http"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
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
	if werr := e.codeModeProfile(tenantOf(r).Name, req); werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	resp, cerr := clientwire.CodeMode(req, e.limits(req.Limits), e.base.MemoryFloor())
	if cerr != nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "%v", cerr))
		return
	}
	writeJSON(w, resp)
}
