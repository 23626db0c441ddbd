# template_debian: scripts/build-template-debian debootstraps a minbase
# bookworm from the machine's Debian mirror (about a minute), then a jail runs
# on it through `sbxctl local run`. Needs root and the Debian registry; a
# missing debootstrap or an unreachable mirror fails it, never skips.
add_test(NAME template_debian
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(template_debian PROPERTIES LABELS "integration" TIMEOUT 900)
