package server

import "errors"

// ErrMalformed means an encoded command, result or snapshot could not be
// decoded. Decoding never panics on bad input; it returns this error with
// what was wrong.
var ErrMalformed = errors.New("server: malformed encoding")
