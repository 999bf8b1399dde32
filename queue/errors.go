package queue

import "errors"

// ErrRejected matches every *RejectError with errors.Is.
var ErrRejected = errors.New("job rejected")
