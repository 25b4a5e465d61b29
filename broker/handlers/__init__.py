"""Request handlers, one module per API family; ``table`` lists which handler serves which API key, and
``context`` holds what each handler receives with a request."""
