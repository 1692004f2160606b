// Package p2p is the only package importing libp2p: it forms the mesh and
// carries the core and election messages between daemons.
//
// Not built yet (issue 5).
package p2p
