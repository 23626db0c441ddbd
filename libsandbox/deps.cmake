# Extra dependencies of libsandbox components (see libsandbox/CMakeLists.txt).
# driver/jail compiles its seccomp filter with libseccomp (Debian: libseccomp-dev).
sbx_lib_pkg(SECCOMP libseccomp)
# client: libcurl for the control plane, jansson for its JSON bodies,
# libarchive for the tar streams of push/pull (libsandbox/client).
sbx_lib_pkg(SBX_CURL libcurl)
sbx_lib_pkg(SBX_JANSSON jansson)
sbx_lib_pkg(SBX_ARCHIVE libarchive)
sbx_lib_pkg(SBX_SSL openssl) # TLS of the data plane over https (client/tls.c)
# silkd links sandbox_static with -static and never uses the client, while
# these imported targets name shared objects, which a -static link refuses.
# Their link items are therefore dropped for silkd and for any consumer that
# sets the target property SBX_FULLY_STATIC; include paths stay.
foreach(p SBX_CURL SBX_JANSSON SBX_ARCHIVE SBX_SSL)
  get_target_property(_sbx_libs PkgConfig::${p} INTERFACE_LINK_LIBRARIES)
  set_target_properties(PkgConfig::${p} PROPERTIES INTERFACE_LINK_LIBRARIES
    "$<$<NOT:$<OR:$<BOOL:$<TARGET_PROPERTY:SBX_FULLY_STATIC>>,$<STREQUAL:$<TARGET_PROPERTY:NAME>,silkd>>>:${_sbx_libs}>")
endforeach()
