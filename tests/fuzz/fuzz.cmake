# tests/fuzz: the libFuzzer target fuzz_wire.c is built and run by
# tests/fuzz/run (clang, -fsanitize=fuzzer,address,undefined). Here the same
# target is linked with a plain main (replay_main.c) and replays the fixture
# corpus in all 16 chunking/cap modes, so every ctest run (and the ASan build)
# checks the harness and the codec identities it asserts.
add_executable(fuzz_wire_replay ${CMAKE_CURRENT_LIST_DIR}/fuzz_wire.c ${CMAKE_CURRENT_LIST_DIR}/replay_main.c)
target_link_libraries(fuzz_wire_replay PRIVATE sandbox_static)
add_test(NAME fuzz_wire_replay COMMAND fuzz_wire_replay ${SBX_FIXTURES_DIR}
  --raw ${CMAKE_CURRENT_LIST_DIR}/regressions)
set_tests_properties(fuzz_wire_replay PROPERTIES LABELS fuzz TIMEOUT 300)
