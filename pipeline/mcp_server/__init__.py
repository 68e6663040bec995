"""The MCP server for agents (`dpm mcp`): the client library's operations as tools, a case's decisions as resources."""
