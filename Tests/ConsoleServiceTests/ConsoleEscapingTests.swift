import Mustache
import Testing

@testable import ConsoleService

/// A quote followed by a combining mark is one Character: swift-mustache's own escaping compares Characters and left it
/// as it was, so customer text could end an attribute of a console page. The console escapes by Unicode scalar
/// (`ConsoleHTML`).
struct ConsoleEscapingTests {
    static let hostile = "x\"\u{301} autofocus onfocus=alert(1) '\u{301} <\u{301}b> & \u{1F389}"

    @Test func theLibrarysOwnEscapingLeavesSuchAQuote() throws {
        let template = try MustacheTemplate(string: "<a title=\"{{v}}\">")
        #expect(template.render(["v": "\"\u{301}"]).unicodeScalars.filter { $0 == "\"" }.count == 3)
    }

    @Test func consolePagesEscapeEveryQuoteAndBracket() throws {
        let page = try #require(try ConsoleTemplates.library().render(["heading": Self.hostile, "detail": Self.hostile], withTemplate: "problem"))
        #expect(!page.unicodeScalars.contains("\""))
        #expect(!page.unicodeScalars.contains("'"))
        #expect(page.contains("&quot;\u{301} autofocus"))
        #expect(page.contains("&lt;\u{301}b&gt; &amp; \u{1F389}"))
        #expect(ConsoleService.escape(Self.hostile) == ConsoleHTML.escape(Self.hostile))
    }
}
