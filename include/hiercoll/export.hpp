#pragma once
// Symbols of the public API are exported; everything else stays hidden (-fvisibility=hidden).
#define HIERCOLL_API __attribute__((visibility("default")))
