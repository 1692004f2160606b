// Package codes is the one table of the failures a client of sluice can
// see: for each, its stable spelling in JSON and, for
// the core's, on the wire (wire.Code); its sentinel error; and the HTTP
// status of the agent's API answer. The core, the agent's API, the Go
// client and the CLI translate through it and nowhere else: the agent
// answers an error with Of(err), the client turns a code back into its
// sentinel with ByCode, the agent turns a core event's code into an error
// with ByWire.
//
// It imports nothing of ours but core/wire, and is as pure as the core
// that imports it.
package codes
