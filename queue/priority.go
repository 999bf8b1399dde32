package queue

import "fmt"

// Priority is a job's class in its store's queue: high jobs are decided
// before the normal jobs queued ahead of them, normal ones in their turn.
// Order within a class is kept. It is part of the wire format (the job's
// "priority" field; absent means normal).
type Priority string

// Priorities.
const (
	PriorityNormal Priority = ""
	PriorityHigh   Priority = "high"
)

// MaxHighBatches is how many batches of high jobs in a row the writer
// decides while normal jobs wait; then it decides one batch of normal
// jobs, so that a flood of high jobs never starves normal ones.
const MaxHighBatches = 4

// ParsePriority parses a priority as the command line and the MCP tools
// take it: "high", or "normal" (or empty) for the default.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "", "normal":
		return PriorityNormal, nil
	case "high":
		return PriorityHigh, nil
	}
	return "", fmt.Errorf("priority %q: want high or normal", s)
}

// String is the priority's name: "high" or "normal".
func (p Priority) String() string {
	if p == PriorityNormal {
		return "normal"
	}
	return string(p)
}

// High reports whether j is a high-priority job.
func (j *Job) High() bool { return j.Priority == PriorityHigh }
