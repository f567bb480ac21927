/** The library's version. */
export const VERSION = '0.2.0';
