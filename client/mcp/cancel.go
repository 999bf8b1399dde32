package mcp

import (
	"context"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// cancel is the cancel tool: client.Cancel, its answer as a
// queue.CancelAnswer. Only a cancellation is a success.
func (m *tools) cancel(ctx context.Context, _ *sdk.CallToolRequest, in cancelArgs) (*sdk.CallToolResult, any, error) {
	if p := queue.IDProblem(in.ID); p != "" {
		return errorResult(p), nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Wait)
	defer cancel()
	log := m.cfg.Logger.With("tool", "cancel", "id", in.ID)
	cl, err := m.open(ctx, false)
	if err != nil {
		log.Warn("not cancelled", "err", err)
		return errorResult(fmt.Sprintf("job %s not cancelled: %v", in.ID, err)), nil, nil
	}
	defer cl.Close()
	out, err := cl.Cancel(ctx, in.ID)
	var late *client.TooLateError
	switch {
	case err == nil:
		log.Debug("cancelled")
		return structuredResult(fmt.Sprintf("job %s cancelled: it will never be applied", in.ID),
			queue.CancelAnswer{Result: queue.CancelDone, State: queue.StateOf(out), Outcome: out}), nil, nil
	case errors.As(err, &late):
		res := structuredResult(late.Error(), queue.CancelAnswer{Result: queue.CancelTooLate, State: late.State, Outcome: late.Outcome, Detail: late.Detail})
		res.IsError = true
		return res, nil, nil
	case errors.Is(err, client.ErrUnknownJob):
		res := structuredResult(fmt.Sprintf("job %s: %v", in.ID, err), queue.CancelAnswer{Result: queue.CancelUnknown, State: queue.StateUnknown})
		res.IsError = true
		return res, nil, nil
	case errors.Is(err, client.ErrBusy):
		// The daemon's busy answer: nothing changed.
		res := structuredResult(fmt.Sprintf("job %s not cancelled, nothing changed: %v", in.ID, err), queue.CancelAnswer{Result: queue.CancelBusy, Detail: err.Error()})
		res.IsError = true
		return res, nil, nil
	case errors.Is(err, client.ErrNoDaemon):
		return errorResult(fmt.Sprintf("job %s not cancelled: %v; only the store's daemon holds a queue to cancel from", in.ID, err)), nil, nil
	}
	log.Warn("not cancelled", "err", err)
	return errorResult(fmt.Sprintf("job %s: %v; whether it was cancelled is not known: call again, cancelling twice gives the same answer", in.ID, err)), nil, nil
}
