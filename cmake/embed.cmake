# embed.cmake — a binary file as a C++ array: cmake -DIN=file -DOUT=file.cpp -DNAME=symbol -P.
# The array is 16-byte aligned (a fatbin must be 8-byte aligned for cuModuleLoadData).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "// Generated from ${IN} by cmake/embed.cmake.\n"
     "extern \"C\" alignas(16) const unsigned char ${NAME}[] = {\n${bytes}\n};\n")
