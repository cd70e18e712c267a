package pg

// SetNotifySend replaces how n sends one notification.
func SetNotifySend(n *Notifier, send func() error) { n.send = send }
