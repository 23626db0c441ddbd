# mcp_sdk: `sbxctl mcp` driven by the official MCP TypeScript SDK client
# against a real sandboxd (jail driver: needs root). run.sh installs the SDK
# with npm when node_modules is missing; a missing node or npm fails it.
add_test(NAME mcp_sdk COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(mcp_sdk PROPERTIES LABELS "integration" TIMEOUT 600)
