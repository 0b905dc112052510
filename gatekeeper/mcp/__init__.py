"""The MCP server: bounds, tools and the repository gateway."""
