/**
 * The store's result shapes are declared once (issue 13, item 4): the public RPC group sends the
 * domain Schemas themselves, and the Store service's result types are those Schemas' types.
 */
import { assert, describe, expectTypeOf, it } from "@effect/vitest"
import * as StoreResults from "../../src/domain/StoreResults.js"
import { NativegenRpcs } from "../../src/rpc/Api.js"
import type * as Store from "../../src/services/Store.js"

const successOf = (tag: string) => NativegenRpcs.requests.get(tag)?.successSchema

describe("store results", () => {
  it("the RPC group's store results are the domain Schemas, not copies", () => {
    assert.strictEqual(successOf("StoreList"), StoreResults.Listing)
    assert.strictEqual(successOf("StoreVerify"), StoreResults.VerifiedBlob)
    assert.strictEqual(successOf("StoreActivate"), StoreResults.Activation)
    assert.strictEqual(successOf("StoreReap"), StoreResults.ReapReport)
    assert.strictEqual(successOf("StoreDeactivate"), StoreResults.Deactivation)
  })

  it("the Store's result types are the Schemas' types; its verified blob adds only the inode identity", () => {
    expectTypeOf<Store.Activation>().toEqualTypeOf<typeof StoreResults.Activation.Type>()
    expectTypeOf<Store.ActiveModel>().toEqualTypeOf<typeof StoreResults.ActiveModel.Type>()
    expectTypeOf<Store.PassedOver>().toEqualTypeOf<typeof StoreResults.PassedOver.Type>()
    expectTypeOf<Store.Listing>().toEqualTypeOf<typeof StoreResults.Listing.Type>()
    expectTypeOf<Store.ReapReport>().toEqualTypeOf<typeof StoreResults.ReapReport.Type>()
    expectTypeOf<Store.Deactivation>().toEqualTypeOf<typeof StoreResults.Deactivation.Type>()
    expectTypeOf<Omit<Store.VerifiedBlob, "dev" | "ino">>().toEqualTypeOf<typeof StoreResults.VerifiedBlob.Type>()
  })
})
