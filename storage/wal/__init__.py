"""The write-ahead log: appends are durable here before they are uploaded as objects."""
