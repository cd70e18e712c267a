package stream

// Remembered is how many products the hub keeps the last broadcast state of.
func (h *Hub) Remembered() int {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	return len(h.sent)
}

// Cursor is the watermark the hub's next read starts from.
func (h *Hub) Cursor() uint64 {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	return h.cursor
}
