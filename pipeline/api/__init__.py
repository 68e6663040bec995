"""The HTTP API for agents (`dpm api`): the client library's operations over /v1, keyed per tenant."""
