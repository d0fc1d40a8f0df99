import JSONRPC
import Testing

@Suite struct MessageParserTests {
    private func single(_ s: String) -> Result<RPCRequest, RPCRejection>? {
        if case .single(let r) = RPCMessageParser.parse(Array(s.utf8)) { return r }
        return nil
    }

    @Test func aMissingIdIsANotificationAndANullIdIsNot() throws {
        let note = try single(#"{"jsonrpc":"2.0","method":"m"}"#)!.get()
        #expect(note.isNotification)
        let call = try single(#"{"jsonrpc":"2.0","method":"m","id":null}"#)!.get()
        #expect(call.id == .null)
        #expect(!call.isNotification)
    }

    @Test func idsKeepTheirExactText() throws {
        let r = try single(#"{"jsonrpc":"2.0","method":"m","id":"x\u0041"}"#)!.get()
        #expect(r.id?.description == #""x\u0041""#)
        let n = try single(#"{"jsonrpc":"2.0","method":"m","id":-0}"#)!.get()
        #expect(n.id?.description == "-0")
    }

    @Test func paramsAreHandedOverAsRawJSON() throws {
        let r = try single(#"{"jsonrpc":"2.0","method":"m","params":{"a": [1, 2]},"id":1}"#)!.get()
        #expect(r.params.map { String(decoding: $0, as: UTF8.self) } == #"{"a": [1, 2]}"#)
        let none = try single(#"{"jsonrpc":"2.0","method":"m","id":1}"#)!.get()
        #expect(none.params == nil)
    }

    @Test func methodNamesAreUnescaped() throws {
        let r = try single(#"{"jsonrpc":"2.0","method":"rpc\u002eping","id":1}"#)!.get()
        #expect(r.method == "rpc.ping")
    }

    @Test func batchesKeepOrderAndRejectNonObjects() {
        guard
            case .batch(let items) = RPCMessageParser.parse(
                Array(#"[{"jsonrpc":"2.0","method":"a","id":1}, 5, {"jsonrpc":"2.0","method":"b"}]"#.utf8))
        else {
            Issue.record("not a batch"); return
        }
        #expect(items.count == 3)
        #expect((try? items[0].get())?.method == "a")
        if case .failure(let rejection) = items[1] { #expect(rejection.error.knownCode == .invalidRequest) } else { Issue.record("accepted 5") }
        #expect((try? items[2].get())?.isNotification == true)
    }

    @Test func batchSizeIsCapped() {
        let limits = RPCMessageLimits(maxNestingDepth: 64, maxBatchSize: 2)
        let three = Array(
            #"[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","method":"a","id":2},{"jsonrpc":"2.0","method":"a","id":3}]"#.utf8)
        guard case .single(.failure(let r)) = RPCMessageParser.parse(three, limits: limits) else { Issue.record("accepted"); return }
        #expect(r.error.data.reason == "batchTooLarge")
    }

    @Test func responsesParseResultOrError() throws {
        let ok = Array(#"{"jsonrpc":"2.0","id":7,"result":{"a":1}}"#.utf8)
        let parsed = ok.withUnsafeBytes { RPCResponse.parse($0) }
        #expect(parsed?.first?.id.integerValue == 7)
        let err = Array(
            #"{"jsonrpc":"2.0","id":"s","error":{"code":1006,"message":"slow down","data":{"reason":"rateLimited","retryable":true,"retryAfterMs":250}}}"#
                .utf8)
        let e = err.withUnsafeBytes { RPCResponse.parse($0) }?.first
        guard case .failure(let error)? = e?.outcome else { Issue.record("no error"); return }
        #expect(error.knownCode == .rateLimited)
        #expect(error.data.extra["retryAfterMs"] == 250)
        let both = Array(#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x","data":{"reason":"r","retryable":false}}}"#.utf8)
        #expect(both.withUnsafeBytes { RPCResponse.parse($0) } == nil)
    }
}
