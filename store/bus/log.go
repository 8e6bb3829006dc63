package bus

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// watermillLogger adapts logger for Watermill. Watermill logs every subscription, reconnect and
// topic initialisation at Info; those are routine for a gateway, so they go to Debug and Info
// stays readable. Errors (a consumer group failing, a broker gone) keep their level.
func watermillLogger(logger *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})
}
