package main

import (
	"log/slog"
	"os"

	"ollie/broker"
)

// desktopBroker is the broker the keeper runs for every host it holds.
func desktopBroker(log *slog.Logger) *broker.Broker {
	return &broker.Broker{Approver: &broker.AskpassApprover{Program: os.Getenv("OLLIE_ASKPASS")}, Log: log}
}
