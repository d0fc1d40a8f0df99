import IAPProtocol
import JSONRPC
import Testing

@Suite struct SchemaTests {
    @Test func schemasComeFromTheCodableTypes() {
        #expect(
            SchemaRecorder.schema(for: Credentials.self)
                == .object(properties: [
                    .init("username", .string, required: true), .init("password", .string, required: true),
                    .init("deviceName", .string, required: false), .init("clientAddress", .string, required: false),
                    .init("internalToken", .string, required: false),
                ]))
        guard case let .object(props, _) = SchemaRecorder.schema(for: Product.self) else { Issue.record("not an object"); return }
        #expect(
            props.map(\.name) == ["productId", "type", "referenceName", "title", "description", "status", "grant", "price", "offers", "googlePlay"])
        #expect(props[9].required == false)
        #expect(props[8].required == false)
        #expect(props[1].schema == .string(enumValues: ["consumable", "nonConsumable", "autoRenewable", "nonRenewing"]))
        #expect(props[6].schema == Grant.jsonSchema)
        #expect(props[7].required == false)
        #expect(SchemaRecorder.schema(for: [LedgerEntry].self).json["type"] == "array")
        #expect(SchemaRecorder.schema(for: [String: Int64].self) == .object(properties: [], additionalProperties: .integer))
    }

    @Test func everyContractMethodHasADerivedSchema() {
        for method in ContractMethods.all {
            guard case .object = method.params else {
                Issue.record("\(method.name): params are not an object (\(method.params))")
                continue
            }
            #expect(method.result != .any || method.name.hasPrefix("rpc."), "\(method.name)")
        }
    }

    @Test func violationsNameThePath() {
        let schema = SchemaRecorder.schema(for: CatalogListProducts.Result.self)
        let bad: JSONValue = ["etag": "x", "notModified": "no", "products": [["productId": 1]]]
        let problems = schema.violations(of: bad)
        #expect(problems.contains { $0.hasPrefix("$.notModified: expected boolean") })
        #expect(problems.contains { $0.hasPrefix("$.products[0].productId: expected string") })
        #expect(problems.contains { $0.hasPrefix("$.products[0].type: required member is missing") })
    }

    @Test func schemasRoundTripThroughTheirJSON() {
        for method in ContractMethods.all {
            #expect(JSONSchema(json: method.params.json) == normalized(method.params), "\(method.name)")
        }
    }

    /// Reading back sorts properties by name (JSON objects are unordered).
    private func normalized(_ s: JSONSchema) -> JSONSchema {
        switch s {
        case let .object(props, additional):
            return .object(
                properties: props.sorted { $0.name < $1.name }.map { .init($0.name, normalized($0.schema), required: $0.required) },
                additionalProperties: additional.map(normalized))
        case .array(let items): return .array(normalized(items))
        case .oneOf(let options): return .oneOf(options.map(normalized))
        default: return s
        }
    }
}

@Suite struct ParamsDecodingTests {
    @Test func errorsNameTheField() {
        do {
            _ = try RPCCodec.decodeParams(Credentials.self, from: Array(#"{"username":"a"}"#.utf8))
            Issue.record("decoded")
        } catch {
            #expect(error.knownCode == .invalidParams)
            #expect(error.data.reason == "missingField")
            #expect(error.data.extra["field"] == "password")
        }
        do {
            _ = try RPCCodec.decodeParams(CatalogGetProducts.Params.self, from: Array(#"{"productIds":["a",3]}"#.utf8))
            Issue.record("decoded")
        } catch {
            #expect(error.data.reason == "wrongType")
            #expect(error.data.extra["field"] == "productIds[1]")
        }
    }

    @Test func absentParamsAreAnEmptyObject() throws {
        _ = try RPCCodec.decodeParams(EmptyParams.self, from: nil)
        _ = try RPCCodec.decodeParams(CatalogListProducts.Params.self, from: nil)
    }
}
