/* A plugin that dlplugins.c opens with dlopen, built twice (PLUGIN_ID 1 and 2) as
 * two libraries defining the same functions: calls.rs
 * `listed_functions_of_dlopened_libraries_are_found_by_name` lists plugin_step only. */
#ifndef PLUGIN_ID
#define PLUGIN_ID 1
#endif

long plugin_step(long a, long b, long c) { return PLUGIN_ID * 1000 + a * 100 + b * 10 + c; }

long plugin_untraced(long x) { return x * 3 + PLUGIN_ID; }
