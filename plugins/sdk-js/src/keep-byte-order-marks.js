// The first lines of every JavaScript plugin component: weir-plugin-bundle
// (../node/bundle.js) puts them before the SDK and the plugin. ComponentizeJS 0.22's
// generated bindings decode every string the host passes in (row values, config,
// partition names) with a `new TextDecoder()` made before the plugin's code runs,
// whose default drops a leading U+FEFF (byte order mark): a value would change
// silently, and differ from the same plugin in any other language. Every UTF-8
// decoder in the component keeps it instead: `decode` puts back the U+FEFF that a
// decoder without `ignoreBOM` drops. (A script, not a module: no imports or exports.)
{
  const decode = TextDecoder.prototype.decode;
  TextDecoder.prototype.decode = function (input, options) {
    const text = decode.call(this, input, options);
    if (this.ignoreBOM || this.encoding !== 'utf-8' || input === undefined) {
      return text;
    }
    const bytes = ArrayBuffer.isView(input)
      ? new Uint8Array(input.buffer, input.byteOffset, Math.min(3, input.byteLength))
      : new Uint8Array(input, 0, Math.min(3, input.byteLength));
    const bom = bytes.length === 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
    return bom ? `\ufeff${text}` : text;
  };
}
