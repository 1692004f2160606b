package client

// UsesCompact reports whether c sends acquire, release and renew over the
// compact protocol (it falls back to HTTP for an agent without it).
func UsesCompact(c *Client) bool { return c.compactPool != nil && !c.compactPool.http.Load() }
