"ran"
