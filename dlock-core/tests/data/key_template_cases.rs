// One table of key templates and the key each gives with the parameters `id = "42"` and
// `user = "ann"`. Included by `dlock-core/tests/key_templates.rs` (the attribute) and by
// `dlock-tower/tests/key_templates.rs` (the layer's `path_key`), each of which defines
// `key_template_cases!`: both must build every key alike.
key_template_cases! {
    plain: "plain" => "plain",
    angle: "order:<id>" => "order:42",
    brace: "order:{id}" => "order:42",
    two_parameters: "<user>:{id}" => "ann:42",
    escaped_angles: "a<<b>>:<id>" => "a<b>:42",
    escaped_braces: "a{{b}}:{id}" => "a{b}:42",
    lone_closers: "a>b}c:<id>" => "a>b}c:42",
    braces_around: "{{<id>}}" => "{42}",
    closer_after: "<id>>>" => "42>",
}
