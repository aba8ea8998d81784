// The first lines of every JavaScript plugin component: weir-plugin-bundle
// (../node/bundle.js) puts them before the SDK and the plugin. ComponentizeJS 0.23's
// generated bindings decode every string the host passes in (row values, config,
// partition names) with a `new TextDecoder()` made before the plugin's code runs,
// whose default drops a leading U+FEFF (byte order mark): a value would change
// silently, and differ from the same plugin in any other language. Every UTF-8
// decoder in the component keeps it instead: a decoder without `ignoreBOM` decodes
// through a twin of its own made with `ignoreBOM: true` (and the same `fatal`), which
// gives the same text but for the U+FEFF kept, streaming included (each decoder has
// its own twin, so a stream's state stays its own). The twin is looked up once per
// call: this runs for every string of every row. (A script, not a module: no imports
// or exports.)
{
  const decode = TextDecoder.prototype.decode;
  // Each decoder's twin, or the decoder itself where nothing is dropped.
  const twins = new WeakMap();
  TextDecoder.prototype.decode = function (input, options) {
    let twin = twins.get(this);
    if (twin === undefined) {
      twin = this.ignoreBOM || this.encoding !== 'utf-8'
        ? this
        : new TextDecoder('utf-8', { ignoreBOM: true, fatal: this.fatal });
      twins.set(this, twin);
    }
    return decode.call(twin, input, options);
  };
}
